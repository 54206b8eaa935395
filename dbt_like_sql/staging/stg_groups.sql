-- User groups present at the platform (disabled ones included, flagged).
with

source as (

    select * from {{ source('lms', 'groups') }}

),

renamed as (

    select
        id as group_id,
        title as group_title,
        unique_name,
        description,
        type as group_type,
        coalesce(disabled, false) as is_disabled,
        nb_user,
        nb_active_user,
        first_loaded_at

    from source
    where deleted_at is null

)

select * from renamed
