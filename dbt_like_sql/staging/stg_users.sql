-- Users present at the platform (known through the groups they belong to).
with

source as (

    select * from {{ source('lms', 'users') }}

),

renamed as (

    select
        id as user_id,
        login,
        email,
        firstname,
        lastname,
        alias,
        locale,
        points,
        first_loaded_at

    from source
    where deleted_at is null

)

select * from renamed
