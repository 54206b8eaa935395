-- Current group memberships (a membership that vanished at the platform is left out).
with

source as (

    select * from {{ source('lms', 'group_members') }}

),

renamed as (

    select
        group_id,
        user_id,
        first_loaded_at as member_since_load

    from source
    where deleted_at is null

)

select * from renamed
